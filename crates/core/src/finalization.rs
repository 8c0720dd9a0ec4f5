//! The capability-free finalization attempt and the settled-turn finalization context.
//!
//! [`FinalizationAttempt`] is what a harness receives for a finalization try. Its fields are
//! plain data: it has no field that could hold a tool surface, permission grant, user-input
//! channel, native exec hook, agent, skill, memory, scheduler, extension or remote control, and
//! its constructor is the only way to build it. Adding such a capability would be a type change,
//! not a runtime check.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::attempt::{AgentMessage, SessionTarget};
use crate::ids::{HarnessId, RunId};
use crate::time::Timestamp;

/// A cancellation flag shared between the host and a harness. Cloning shares the flag.
#[derive(Debug, Clone, Default)]
pub struct Cancellation(Arc<AtomicBool>);

impl Cancellation {
    /// A fresh, uncancelled flag.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether cancellation was requested.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// One capability-free finalization try.
#[derive(Debug, Clone)]
pub struct FinalizationAttempt {
    run_id: RunId,
    prompt: String,
    session: SessionTarget,
    cancellation: Cancellation,
    deadline: Option<Timestamp>,
    try_number: u8,
}

impl FinalizationAttempt {
    /// Builds a try. Each try gets its own cancellation and deadline.
    pub fn new(
        run_id: RunId,
        prompt: String,
        session: SessionTarget,
        cancellation: Cancellation,
        deadline: Option<Timestamp>,
        try_number: u8,
    ) -> Self {
        Self {
            run_id,
            prompt,
            session,
            cancellation,
            deadline,
            try_number,
        }
    }

    /// The host run.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The host finalization prompt: the only input the harness may send.
    pub fn prompt(&self) -> &str {
        &self.prompt
    }

    /// The committed session target.
    pub fn session(&self) -> &SessionTarget {
        &self.session
    }

    /// This try's cancellation.
    pub fn cancellation(&self) -> &Cancellation {
        &self.cancellation
    }

    /// This try's deadline.
    pub fn deadline(&self) -> Option<Timestamp> {
        self.deadline
    }

    /// 1 for the first try, 2 for the retry.
    pub fn try_number(&self) -> u8 {
        self.try_number
    }
}

/// Opaque finalization evidence that only its owning harness can open.
///
/// The payload is any `'static` type private to the harness; [`HarnessFinalizationData::open`]
/// succeeds only for that exact type, so a structurally identical value built elsewhere is
/// rejected by the type system rather than by a field check. The payload is immutable once
/// wrapped (shared behind an `Arc`).
#[derive(Clone)]
pub struct HarnessFinalizationData {
    owner: HarnessId,
    payload: Arc<dyn Any + Send + Sync>,
}

impl HarnessFinalizationData {
    /// Wraps (and freezes) a harness's evidence.
    pub fn new<T: Any + Send + Sync>(owner: HarnessId, payload: T) -> Self {
        Self {
            owner,
            payload: Arc::new(payload),
        }
    }

    /// The harness that produced it.
    pub fn owner(&self) -> &HarnessId {
        &self.owner
    }

    /// Opens the evidence as the owner's private type `T`; `None` for any other type.
    pub fn open<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.payload.downcast_ref::<T>()
    }
}

impl fmt::Debug for HarnessFinalizationData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HarnessFinalizationData")
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// Eligibility and evidence for settled-turn finalization, frozen by its producer.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum SettledTurnFinalizationContext {
    /// The complete application transcript through the settled tool-result boundary.
    Transcript(Arc<[AgentMessage]>),
    /// A bounded projection only the owning harness interprets.
    Harness(HarnessFinalizationData),
    /// Eligible, but no safe replay evidence: a finalizer must refuse it before any I/O.
    Unavailable,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq)]
    struct OwnEvidence(Vec<String>);
    #[derive(Debug, PartialEq)]
    struct LookAlike(Vec<String>);

    #[test]
    fn harness_data_opens_only_as_its_own_type() {
        let data = HarnessFinalizationData::new(
            HarnessId::new("codex").unwrap(),
            OwnEvidence(vec!["item".into()]),
        );
        assert_eq!(data.open::<OwnEvidence>().unwrap().0, vec!["item"]);
        assert!(data.open::<LookAlike>().is_none());
    }

    #[test]
    fn cancellation_is_shared() {
        let c = Cancellation::new();
        let other = c.clone();
        assert!(!other.is_cancelled());
        c.cancel();
        assert!(other.is_cancelled());
    }
}
