//! The authority object: caller checks plus the exact host lineage to re-verify.

use std::fmt;
use std::sync::Arc;

use futures::future::join_all;
use tether_core::{AssertCurrent, Error, HostSessionRead, HostSessionStore, SessionId, SessionKey};

use super::GenerationTexts;

/// One lineage fact an authority re-verifies: the host row under `session_key` in `store` must
/// still name `session_id` with exactly `previous_session_id` as its predecessor.
#[derive(Debug, Clone)]
pub struct LineageEntry {
    /// The host session store that owns the row.
    pub store: Arc<dyn HostSessionStore>,
    /// The row's key.
    pub session_key: SessionKey,
    /// The generation the authority stands for.
    pub session_id: SessionId,
    /// The predecessor recorded when the authority was captured.
    pub previous_session_id: Option<SessionId>,
    /// The texts of the superseded error raised when the row moved.
    pub texts: GenerationTexts,
}

impl LineageEntry {
    /// Whether `read` still proves this lineage (same `session_id` and same predecessor).
    /// A missing row or a failed read proves nothing.
    pub fn admits(&self, read: &HostSessionRead) -> bool {
        matches!(read.entry(), Some(entry)
            if entry.session_id == self.session_id
                && entry.previous_session_id == self.previous_session_id)
    }

    fn superseded(&self) -> Error {
        self.texts.superseded(&self.session_id)
    }

    fn read_key(&self) -> (usize, &SessionKey) {
        (
            Arc::as_ptr(&self.store).cast::<()>().addr(),
            &self.session_key,
        )
    }
}

struct AuthorityInner {
    checks: Vec<AssertCurrent>,
    lineage: Vec<LineageEntry>,
    superseded: Vec<Error>,
}

/// An authority: the caller's synchronous checks (lifecycle, cancellation) plus the host lineage
/// entries that must be re-read before any effect.
///
/// Cloning shares the authority (combining deduplicates by identity). [`Self::assert_current`]
/// does no durable read; [`Self::with_current`] reads every lineage entry in one pass.
#[derive(Clone)]
pub struct BindingAuthority {
    inner: Arc<AuthorityInner>,
}

impl fmt::Debug for BindingAuthority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BindingAuthority")
            .field("checks", &self.inner.checks.len())
            .field("lineage", &self.inner.lineage)
            .field("superseded", &self.inner.superseded)
            .finish()
    }
}

impl BindingAuthority {
    /// An authority over `assert_current` and `lineage`.
    pub fn new(assert_current: AssertCurrent, lineage: Vec<LineageEntry>) -> Self {
        Self::from_parts(vec![assert_current], lineage, Vec::new())
    }

    /// The caller's authority alone (no lineage): an ephemeral session.
    pub fn caller(assert_current: AssertCurrent) -> Self {
        Self::new(assert_current, Vec::new())
    }

    /// An authority that always fails with `error` (a superseded capture), after the caller's
    /// own check.
    pub(crate) fn superseded(assert_current: AssertCurrent, error: Error) -> Self {
        Self::from_parts(vec![assert_current], Vec::new(), vec![error])
    }

    fn from_parts(
        checks: Vec<AssertCurrent>,
        lineage: Vec<LineageEntry>,
        superseded: Vec<Error>,
    ) -> Self {
        Self {
            inner: Arc::new(AuthorityInner {
                checks,
                lineage,
                superseded,
            }),
        }
    }

    /// Whether `self` and `other` are the same authority object.
    pub fn same(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// The lineage entries this authority re-verifies.
    pub fn lineage(&self) -> &[LineageEntry] {
        &self.inner.lineage
    }

    /// The caller checks only: lifecycle and cancellation, and a superseded capture. No durable
    /// read, so this never proves the host generation; use [`Self::with_current`] for that.
    pub fn assert_current(&self) -> Result<(), Error> {
        for check in &self.inner.checks {
            check()?;
        }
        match self.inner.superseded.first() {
            Some(error) => Err(error.clone()),
            None => Ok(()),
        }
    }

    /// The synchronous caller checks as an [`AssertCurrent`] (for APIs that take one).
    pub fn assert_current_fn(&self) -> AssertCurrent {
        let this = self.clone();
        Arc::new(move || this.assert_current())
    }

    /// Asserts the caller, reads every lineage entry in **one** pass (duplicate reads are
    /// shared), asserts the caller again, checks each entry's `session_id` and
    /// `previous_session_id`, and only then calls `consume` synchronously.
    ///
    /// `consume` is never called when any check fails.
    #[tracing::instrument(name = "generation.with_current", skip_all, fields(lineage = self.inner.lineage.len()))]
    pub async fn with_current<T>(&self, consume: impl FnOnce() -> T) -> Result<T, Error> {
        self.assert_current()?;
        let mut keys: Vec<(usize, &SessionKey)> = Vec::new();
        let mut stores: Vec<&Arc<dyn HostSessionStore>> = Vec::new();
        for entry in &self.inner.lineage {
            let key = entry.read_key();
            if !keys.contains(&key) {
                keys.push(key);
                stores.push(&entry.store);
            }
        }
        let reads = join_all(
            stores
                .iter()
                .zip(&keys)
                .map(|(store, (_, key))| store.read_session(key)),
        )
        .await;
        self.assert_current()?;
        for entry in &self.inner.lineage {
            let key = entry.read_key();
            let index = keys.iter().position(|k| *k == key);
            let admitted = index
                .and_then(|i| reads.get(i))
                .is_some_and(|read| entry.admits(read));
            if !admitted {
                tracing::debug!(session_id = %entry.session_id, "native lineage superseded");
                return Err(entry.superseded());
            }
        }
        Ok(consume())
    }

    /// [`Self::with_current`] with no effect: proves the lineage is still current now.
    pub async fn verify(&self) -> Result<(), Error> {
        self.with_current(|| ()).await
    }

    /// Combines authorities: duplicates (the same authority object) are dropped, a single
    /// authority is returned unchanged, and otherwise a new authority runs every caller check
    /// and re-reads the concatenated lineage in one pass ("batch every owner into one retained
    /// read rather than nesting admissions").
    ///
    /// # Panics
    ///
    /// Never: an empty input yields an authority that always passes.
    pub fn combine(authorities: impl IntoIterator<Item = BindingAuthority>) -> BindingAuthority {
        let mut unique: Vec<BindingAuthority> = Vec::new();
        for authority in authorities {
            if !unique.iter().any(|u| u.same(&authority)) {
                unique.push(authority);
            }
        }
        if unique.len() == 1 {
            return unique.remove(0);
        }
        let mut checks = Vec::new();
        let mut lineage = Vec::new();
        let mut superseded = Vec::new();
        for authority in &unique {
            checks.extend(authority.inner.checks.iter().cloned());
            lineage.extend(authority.inner.lineage.iter().cloned());
            superseded.extend(authority.inner.superseded.iter().cloned());
        }
        Self::from_parts(checks, lineage, superseded)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_core::always_current;

    #[test]
    fn combine_dedupes_and_returns_a_single_authority_unchanged() {
        let a = BindingAuthority::caller(always_current());
        let combined = BindingAuthority::combine([a.clone(), a.clone()]);
        assert!(combined.same(&a));
        let b = BindingAuthority::caller(Arc::new(|| Err(Error::revoked("closed"))));
        let both = BindingAuthority::combine([a.clone(), b.clone(), a]);
        assert!(!both.same(&b));
        assert_eq!(both.assert_current().unwrap_err().to_string(), "closed");
    }

    #[test]
    fn superseded_authority_fails_after_the_caller_check() {
        let err = GenerationTexts::default().superseded(&SessionId::new("s").unwrap());
        let authority = BindingAuthority::superseded(always_current(), err);
        assert!(matches!(
            authority.assert_current(),
            Err(Error::SupersededGeneration { .. })
        ));
        let closed = BindingAuthority::superseded(
            Arc::new(|| Err(Error::revoked("caller closed"))),
            GenerationTexts::default().superseded(&SessionId::new("s").unwrap()),
        );
        assert_eq!(
            closed.assert_current().unwrap_err().to_string(),
            "caller closed"
        );
    }
}
