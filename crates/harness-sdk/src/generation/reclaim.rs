//! Binding resolution and generation reclamation over a backend's generation operations.

use std::fmt;

use async_trait::async_trait;
use tether_core::{Error, SessionId};

use super::{
    BindingAuthority, GenerationAuthority, GenerationCapture, GenerationState, GenerationTarget,
};

/// A backend's plan for reclaiming its row for the current generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReclaimPlan {
    /// Nothing to verify: the answer is known (`true` when the generation may proceed).
    Resolved(bool),
    /// The row belongs to `expected_previous`; the host must prove that generation is the
    /// recorded predecessor before the row is adopted or reclaimed.
    Verify {
        /// The generation that owns the row now.
        expected_previous: SessionId,
    },
}

/// The result of adopting a predecessor's binding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdoptionResult {
    /// No active binding to adopt.
    Absent,
    /// The binding already belongs to the target generation.
    Current,
    /// The binding moved from the predecessor to the target generation.
    Adopted,
    /// The binding belongs to a generation other than the expected predecessor.
    Conflict,
}

/// The generation operations a harness backend provides for one target generation.
///
/// `adopt` and `reclaim` receive the authority to write under: an implementation commits its
/// write inside [`BindingAuthority::with_current`] (or an equivalent store-side admission) so a
/// lineage change between the plan and the write refuses the write.
#[async_trait]
pub trait GenerationOperations: Send + Sync {
    /// Inspects the row: resolved, or the predecessor to verify.
    async fn prepare_reclaim(&self) -> Result<ReclaimPlan, Error>;

    /// Moves an active binding owned by `expected_previous` to the target generation.
    async fn adopt(
        &self,
        expected_previous: &SessionId,
        authority: &BindingAuthority,
    ) -> Result<AdoptionResult, Error>;

    /// Reclaims a stale row owned by `expected_previous` as a cleared row of the target
    /// generation. Returns whether the target may proceed.
    async fn reclaim(
        &self,
        expected_previous: &SessionId,
        authority: &BindingAuthority,
    ) -> Result<bool, Error>;
}

/// Reads a backend's binding for the target generation, or (ownership checks only) for a
/// named generation such as the recorded predecessor.
#[async_trait]
pub trait BindingReader: Send + Sync {
    /// The backend's binding.
    type Binding: Send + Sync;

    /// Reads the binding of `generation`, or of the target generation when `None`. Reading
    /// never adopts.
    async fn read_binding(
        &self,
        generation: Option<&SessionId>,
    ) -> Result<Option<Self::Binding>, Error>;
}

/// An ownership check on the binding (or the predecessor's binding when the target has none).
pub type AssertBinding<'a, B> = &'a (dyn Fn(Option<&B>) -> Result<(), Error> + Send + Sync);

/// The parameters of [`GenerationAuthority::resolve_binding`].
pub struct ResolveRequest<'a, R: BindingReader> {
    /// The session.
    pub target: &'a GenerationTarget,
    /// The caller's authority.
    pub caller: &'a BindingAuthority,
    /// The binding reader.
    pub reader: &'a R,
    /// The backend's generation operations, when it can adopt or reclaim.
    pub generation: Option<&'a dyn GenerationOperations>,
    /// Whether a stale row may be reclaimed; when set, an unreclaimable row is an error.
    pub reclaim_stale: bool,
    /// The ownership check.
    pub assert_binding: Option<AssertBinding<'a, R::Binding>>,
}

impl<R: BindingReader> fmt::Debug for ResolveRequest<'_, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolveRequest")
            .field("target", self.target)
            .field("caller", self.caller)
            .field("generation", &self.generation.is_some())
            .field("reclaim_stale", &self.reclaim_stale)
            .field("assert_binding", &self.assert_binding.is_some())
            .finish()
    }
}

/// A resolved binding and the lineage-carrying authority to re-check after every wait.
#[non_exhaustive]
pub struct ResolvedBinding<B> {
    /// The binding, when there is one.
    pub binding: Option<B>,
    /// The caller's authority combined with the captured lineage.
    pub authority: BindingAuthority,
    /// The captured state.
    pub state: GenerationState,
    /// How the current generation replaced its recorded predecessor (when the state is
    /// current and there is one): a harness that keeps native state of its own beside the
    /// binding (a pending continuation, say) drops it after a
    /// [`GenerationChange::Reset`](tether_core::GenerationChange::Reset).
    pub previous_change: Option<tether_core::GenerationChange>,
}

impl<B> fmt::Debug for ResolvedBinding<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedBinding")
            .field("binding", &self.binding.is_some())
            .field("authority", &self.authority)
            .field("state", &self.state)
            .field("previous_change", &self.previous_change)
            .finish()
    }
}

impl GenerationAuthority {
    /// The core reclamation step on an existing capture ("adopt a verified predecessor before
    /// stale reclamation"):
    ///
    /// 1. ask the backend for a plan, then re-verify the lineage;
    /// 2. a resolved plan is the answer;
    /// 3. without a current host generation nothing is verified: `false`;
    /// 4. if the host's recorded predecessor is exactly the row's owner:
    ///    - and this generation replaced it by a transfer (a compaction), adopt it
    ///      (re-verifying afterwards); anything but `Absent` is final (`Conflict` → `false`);
    ///    - and it replaced it by a reset or a cut
    ///      ([`GenerationChange`](tether_core::GenerationChange)), never adopt:
    ///      reclaim the row (cleared for this generation), whatever `reclaim_stale` says — the
    ///      host's record proves the row stale. This is what the reset's notification does, so
    ///      a notification lost to a crash after the host's COMMIT changes nothing. Only a row
    ///      the backend refuses to clear (a supervision binding, which a reset keeps too) is
    ///      then adopted;
    /// 5. if the row belongs to an earlier generation than the recorded predecessor (two
    ///    changes without a turn between them: a compaction, then `/new`) and this generation
    ///    began with a reset or a cut ([`GenerationCapture::began_afresh`]), reclaim it the
    ///    same way, whatever `reclaim_stale` says: the reset or cut ended that context too.
    ///    Such a row is never adopted, so one the backend refuses to clear stays (`false`);
    ///    nor is it cleared under an ownership check (`resolve_binding` with
    ///    `assert_binding`), which sees only the current and the predecessor's binding;
    /// 6. otherwise, unless `reclaim_stale`, `false`; else reclaim the stale row.
    ///
    /// Every await is followed by a lineage check, so a host rotation during the wait fails
    /// with the superseded error instead of bridging two generations.
    #[tracing::instrument(name = "generation.reclaim_prepared", skip_all, fields(session_id = %capture.target().session_id))]
    pub async fn reclaim_prepared(
        &self,
        capture: &GenerationCapture,
        ops: &dyn GenerationOperations,
        reclaim_stale: bool,
    ) -> Result<bool, Error> {
        self.reclaim_with(capture, ops, reclaim_stale, true).await
    }

    /// [`Self::reclaim_prepared`]; step 5 only with `clear_earlier` (a resolution with an
    /// ownership check leaves an earlier generation's row alone: the check never saw it).
    async fn reclaim_with(
        &self,
        capture: &GenerationCapture,
        ops: &dyn GenerationOperations,
        reclaim_stale: bool,
        clear_earlier: bool,
    ) -> Result<bool, Error> {
        let authority = capture.authority();
        let plan = ops.prepare_reclaim().await?;
        authority.verify().await?;
        let expected_previous = match plan {
            ReclaimPlan::Resolved(result) => return Ok(result),
            ReclaimPlan::Verify { expected_previous } => expected_previous,
        };
        if capture.state() != GenerationState::Current {
            return Ok(false);
        }
        if capture.previous_session_id() == Some(&expected_previous)
            && capture.continued_predecessor().is_none()
        {
            tracing::info!(previous = %expected_previous, change = ?capture.previous_change(), "the recorded predecessor's native context ends here: its binding is reclaimed, not adopted");
            let reclaimed = ops.reclaim(&expected_previous, authority).await?;
            authority.verify().await?;
            if reclaimed {
                return Ok(true);
            }
            // A binding the backend may not clear (a supervision binding: its owner, not the
            // session, decides over the native thread; a reset's notification keeps it too)
            // follows the session, as it did before the change was recorded; anything else
            // the backend refused stays refused.
            let adopted = ops.adopt(&expected_previous, authority).await?;
            authority.verify().await?;
            return Ok(adopted != AdoptionResult::Conflict);
        }
        if clear_earlier
            && capture.began_afresh()
            && expected_previous != capture.target().session_id
        {
            tracing::info!(owner = %expected_previous, change = ?capture.previous_change(), "a generation before the recorded predecessor left this binding; the reset or cut that began this generation ended its context: reclaimed, not adopted");
            let reclaimed = ops.reclaim(&expected_previous, authority).await?;
            authority.verify().await?;
            return Ok(reclaimed);
        }
        if capture.continued_predecessor() == Some(&expected_previous) {
            let adopted = ops.adopt(&expected_previous, authority).await?;
            authority.verify().await?;
            if adopted != AdoptionResult::Absent {
                return Ok(adopted != AdoptionResult::Conflict);
            }
        }
        if !reclaim_stale {
            return Ok(false);
        }
        let reclaimed = ops.reclaim(&expected_previous, authority).await?;
        authority.verify().await?;
        Ok(reclaimed)
    }

    /// Reclaims the target's row: asserts the caller; a session without a key needs no
    /// reclamation (`true`); a superseded capture gives `false`; otherwise
    /// [`Self::reclaim_prepared`].
    pub async fn reclaim_generation(
        &self,
        target: &GenerationTarget,
        caller: &BindingAuthority,
        ops: &dyn GenerationOperations,
        reclaim_stale: bool,
    ) -> Result<bool, Error> {
        caller.assert_current()?;
        if target.session_key.is_none() {
            return Ok(true);
        }
        let capture = self.capture(target, caller).await?;
        if capture.state() == GenerationState::Superseded {
            return Ok(false);
        }
        self.reclaim_prepared(&capture, ops, reclaim_stale).await
    }

    /// Resolves the target's binding under a captured generation authority.
    ///
    /// 1. caller check, capture (when the target has a key), lineage check — a superseded or
    ///    unreadable host row fails here even when a binding is readable;
    /// 2. read the binding; the ownership check sees it, or — only when there is none and the
    ///    host row records a predecessor — the predecessor's binding, which is read but never
    ///    adopted here, so a refused owner is never adopted nor cleared;
    /// 3. when the binding is absent and the backend has generation operations, run
    ///    [`Self::reclaim_prepared`] (an unreclaimable row with `reclaim_stale` set is the
    ///    superseded error) and read again;
    /// 4. a final lineage check, then the ownership check on the final binding.
    ///
    /// The returned authority must be re-checked after every later await.
    #[tracing::instrument(name = "generation.resolve_binding", skip_all, fields(session_id = %request.target.session_id))]
    pub async fn resolve_binding<R: BindingReader>(
        &self,
        request: ResolveRequest<'_, R>,
    ) -> Result<ResolvedBinding<R::Binding>, Error> {
        let ResolveRequest {
            target,
            caller,
            reader,
            generation,
            reclaim_stale,
            assert_binding,
        } = request;
        caller.assert_current()?;
        let capture = self.capture(target, caller).await?;
        let authority = capture.authority().clone();
        authority.verify().await?;

        let mut binding = reader.read_binding(None).await?;
        authority.verify().await?;
        if let Some(assert_binding) = assert_binding {
            // Ownership before any adoption or clearing: the binding, or the recorded
            // predecessor's binding (read, never adopted here), which the reclamation below
            // adopts across a transfer and clears across a cut or a reset.
            if binding.is_some() {
                assert_binding(binding.as_ref())?;
            } else if let (GenerationState::Current, Some(previous)) =
                (capture.state(), capture.previous_session_id())
            {
                let predecessor = reader.read_binding(Some(previous)).await?;
                authority.verify().await?;
                assert_binding(predecessor.as_ref())?;
            } else {
                assert_binding(None)?;
            }
        }

        if binding.is_none()
            && let Some(ops) = generation
            && target.session_key.is_some()
        {
            let reclaimed = self
                .reclaim_with(&capture, ops, reclaim_stale, assert_binding.is_none())
                .await?;
            if !reclaimed && reclaim_stale {
                return Err(capture.superseded_error());
            }
            binding = reader.read_binding(None).await?;
            authority.verify().await?;
        }

        authority.verify().await?;
        if let Some(assert_binding) = assert_binding {
            assert_binding(binding.as_ref())?;
        }
        Ok(ResolvedBinding {
            binding,
            authority,
            state: capture.state(),
            previous_change: capture.previous_change(),
        })
    }
}
