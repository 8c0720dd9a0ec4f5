//! The backend's lease and TTL policy and its error texts (see `docs/harness-backend.md`,
//! "Thread-binding backend").

use std::sync::Arc;
use std::time::Duration;

use tether_core::{BindingKey, BindingKeyKind, Error, ErrorTexts, LeaseWrite};

use super::identity::BindingIdentity;
use super::record::ThreadBindingRecord;
use crate::lifecycle::{PrepareLease, ReleaseTtl};

/// How long a retired **physical** generation fence stays: the wait budget (70 s), so stale
/// lease work of that generation drains before the row disappears. Stable-key fences stay.
pub const PHYSICAL_RETIRE_TTL: Duration = Duration::from_secs(70);

/// The TTL of a cleared row with nothing left to keep: it vanishes at once, so cleared rows never
/// fill the namespace's capacity.
pub const CLEARED_TTL: Duration = Duration::from_millis(1);

/// The default row capacity of a thread-binding namespace: 50,000 rows, new rows refused when
/// full (see `docs/harness-backend.md`, "Record, keys and capacity").
pub const DEFAULT_MAX_ENTRIES: u64 = 50_000;

/// The backend's own error texts (`{key}` is replaced with the binding key).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendTexts {
    /// The record of the row being deleted belongs to another, still active generation.
    pub generation_changed: String,
    /// A deletion met a supervision binding.
    pub supervision: String,
    /// A deletion met a thread claimed by active work.
    pub claimed: String,
}

impl Default for BackendTexts {
    fn default() -> Self {
        Self {
            generation_changed:
                "Native thread binding generation changed before session deletion: {key}".into(),
            supervision:
                "Cannot delete a session while its native thread binding is owned by supervision"
                    .into(),
            claimed: "Cannot delete a session while its native thread is claimed by active work"
                .into(),
        }
    }
}

impl BackendTexts {
    /// [`Error::DeletionChanged`] with the generation-changed text.
    pub fn generation_changed(&self, key: &BindingKey) -> Error {
        Error::DeletionChanged {
            key: key.clone(),
            message: self.generation_changed.replace("{key}", key.as_str()),
        }
    }

    /// [`Error::Revoked`] with the supervision text.
    pub fn supervision(&self) -> Error {
        Error::revoked(self.supervision.clone())
    }

    /// [`Error::CompetingWork`] with the claimed-thread text.
    pub fn claimed(&self, thread_id: &str) -> Error {
        Error::CompetingWork {
            session: thread_id.to_owned(),
            message: self.claimed.clone(),
        }
    }
}

/// The lifecycle error texts of the backend: "Lost native thread binding lease", with a rejected
/// acquisition reading "Native thread binding generation was retired: {key}".
pub fn default_error_texts() -> ErrorTexts {
    ErrorTexts {
        lost_lease: "Lost native thread binding lease: {key}".into(),
        acquisition_rejected: "Native thread binding generation was retired: {key}".into(),
        ..ErrorTexts::default()
    }
}

/// The lease policy for `identity` (see `docs/harness-backend.md`, "Lease policy"):
///
/// - a cleared+retired row owned by this generation is refused unless `allow_retired`
///   (deletion, or the authoritative reclaim path);
/// - an active row is kept as it is (a lease never swaps the generation);
/// - a retired row of another generation is kept as it is (the successor may lease, not write);
/// - an absent or cleared row becomes a cleared row owned by its previous owner, or else by
///   this generation, keeping its task import.
pub fn prepare_lease(
    identity: &BindingIdentity,
    allow_retired: bool,
) -> PrepareLease<ThreadBindingRecord> {
    let identity = identity.clone();
    Arc::new(
        move |current: Option<&ThreadBindingRecord>, _lease: &LeaseWrite| match current {
            Some(record) if record.is_retired() => {
                if identity.owns(record.session_id.as_ref()) && !allow_retired {
                    None
                } else {
                    Some(record.clone())
                }
            }
            Some(record) if record.is_active() => Some(record.clone()),
            Some(record) => Some(ThreadBindingRecord {
                session_id: record
                    .session_id
                    .clone()
                    .or_else(|| identity.session_id().cloned()),
                ..record.clone().into_cleared(false)
            }),
            None => Some(ThreadBindingRecord::cleared(
                identity.session_id().cloned(),
                false,
            )),
        },
    )
}

/// The TTL a row gets when its lease is released:
///
/// - kept (no TTL) when it holds a task import, is active, or is a retired fence under a
///   stable or conversation key;
/// - [`PHYSICAL_RETIRE_TTL`] for a retired fence under a physical key;
/// - [`CLEARED_TTL`] otherwise: a cleared row with nothing left vanishes on release.
pub fn release_ttl(key: &BindingKey, record: &ThreadBindingRecord) -> Option<Duration> {
    if record.task_import.is_some() || record.is_active() {
        return None;
    }
    if record.is_retired() {
        return (key.kind() == BindingKeyKind::Physical).then_some(PHYSICAL_RETIRE_TTL);
    }
    Some(CLEARED_TTL)
}

/// [`release_ttl`] as the lifecycle's release policy.
pub fn release_ttl_policy() -> ReleaseTtl<ThreadBindingRecord> {
    Arc::new(release_ttl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::{AgentId, LeaseToken, SessionId, SessionKey, Timestamp};

    use crate::backend::record::ThreadBinding;

    fn sid(s: &str) -> SessionId {
        SessionId::new(s).unwrap()
    }

    fn identity(s: &str) -> BindingIdentity {
        BindingIdentity::session(
            AgentId::new("main").unwrap(),
            sid(s),
            Some(SessionKey::new("agent:main:k").unwrap()),
        )
    }

    fn lease() -> LeaseWrite {
        LeaseWrite {
            token: LeaseToken::new("t").unwrap(),
            expires_at: Timestamp::from_millis(1),
            holder: None,
        }
    }

    #[test]
    fn lease_policy_follows_the_reference() {
        let s1 = identity("s1");
        let s2 = identity("s2");
        let fence = ThreadBindingRecord::cleared(Some(sid("s1")), true);
        assert_eq!(prepare_lease(&s1, false)(Some(&fence), &lease()), None);
        assert_eq!(
            prepare_lease(&s1, true)(Some(&fence), &lease()),
            Some(fence.clone())
        );
        assert_eq!(
            prepare_lease(&s2, false)(Some(&fence), &lease()),
            Some(fence)
        );

        let active = ThreadBindingRecord::active(ThreadBinding::new("t1", "/"), Some(sid("s1")));
        assert_eq!(
            prepare_lease(&s2, false)(Some(&active), &lease()),
            Some(active)
        );

        let cleared = ThreadBindingRecord::cleared(Some(sid("s1")), false);
        assert_eq!(
            prepare_lease(&s2, false)(Some(&cleared), &lease()),
            Some(cleared)
        );
        assert_eq!(
            prepare_lease(&s2, false)(None, &lease()),
            Some(ThreadBindingRecord::cleared(Some(sid("s2")), false))
        );
    }

    #[test]
    fn release_ttl_keeps_only_what_must_stay() {
        let stable = identity("s1");
        let physical = BindingIdentity::session(AgentId::new("main").unwrap(), sid("s1"), None);
        let fence = ThreadBindingRecord::cleared(Some(sid("s1")), true);
        assert_eq!(release_ttl(stable.key(), &fence), None);
        assert_eq!(
            release_ttl(physical.key(), &fence),
            Some(PHYSICAL_RETIRE_TTL)
        );
        let cleared = ThreadBindingRecord::cleared(Some(sid("s1")), false);
        assert_eq!(release_ttl(stable.key(), &cleared), Some(CLEARED_TTL));
        let mut imported = cleared.clone();
        imported.task_import = Some(serde_json::json!({"task": 1}));
        assert_eq!(release_ttl(stable.key(), &imported), None);
        let active = ThreadBindingRecord::active(ThreadBinding::new("t1", "/"), None);
        assert_eq!(release_ttl(physical.key(), &active), None);
    }
}
