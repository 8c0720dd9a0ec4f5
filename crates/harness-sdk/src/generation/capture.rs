//! Tri-state capture of the host generation.

use std::sync::Arc;

use tether_core::{
    AgentId, Error, GenerationChange, HostSessionRead, HostSessionStore, SessionId, SessionKey,
};

use super::{BindingAuthority, GenerationTexts, LineageEntry};

/// The session a generation decision is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationTarget {
    /// The agent.
    pub agent_id: AgentId,
    /// The physical generation the caller acts for.
    pub session_id: SessionId,
    /// The logical key whose host row is the authority; `None` for a session without one.
    pub session_key: Option<SessionKey>,
}

impl GenerationTarget {
    /// A target.
    pub fn new(agent_id: AgentId, session_id: SessionId, session_key: Option<SessionKey>) -> Self {
        Self {
            agent_id,
            session_id,
            session_key,
        }
    }
}

/// The tri-state outcome of a host read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GenerationState {
    /// The host row names the target generation.
    Current,
    /// There is no host row for the key (or no key): the caller's authority governs.
    Ephemeral,
    /// The host row names another generation, or the read failed.
    Superseded,
}

/// A captured generation decision with the authority that carries it through later waits.
#[derive(Debug, Clone)]
pub struct GenerationCapture {
    target: GenerationTarget,
    state: GenerationState,
    previous_session_id: Option<SessionId>,
    previous_change: Option<GenerationChange>,
    authority: BindingAuthority,
    own: Option<BindingAuthority>,
    texts: GenerationTexts,
}

impl GenerationCapture {
    /// The target.
    pub fn target(&self) -> &GenerationTarget {
        &self.target
    }

    /// The captured state.
    pub fn state(&self) -> GenerationState {
        self.state
    }

    /// The host row's recorded predecessor (only when the state is current).
    pub fn previous_session_id(&self) -> Option<&SessionId> {
        self.previous_session_id.as_ref()
    }

    /// How the current generation replaced its recorded predecessor (only when the state is
    /// current and there is one): only a [`GenerationChange::Transfer`] lets the predecessor's
    /// binding be adopted.
    pub fn previous_change(&self) -> Option<GenerationChange> {
        self.previous_change
    }

    /// The recorded predecessor whose native context continues into this generation: the
    /// predecessor of a transfer, `None` after a reset or a cut (or without one).
    pub fn continued_predecessor(&self) -> Option<&SessionId> {
        self.previous_session_id.as_ref().filter(|_| {
            self.previous_change
                .is_none_or(GenerationChange::continues_native_context)
        })
    }

    /// Whether this generation began with a reset or a cut of a recorded predecessor: the
    /// native context of every earlier generation of the session ended there, not only the
    /// predecessor's (so a binding any earlier generation left is stale, never continued).
    pub fn began_afresh(&self) -> bool {
        self.previous_session_id.is_some() && self.continued_predecessor().is_none()
    }

    /// The caller's authority combined with the captured lineage. Its
    /// [`BindingAuthority::assert_current`] fails when the state is superseded; its
    /// [`BindingAuthority::with_current`] re-reads the host row when the state is current.
    pub fn authority(&self) -> &BindingAuthority {
        &self.authority
    }

    /// The host part only: ephemeral always passes, superseded always fails, current re-reads
    /// the row and requires the same `session_id` **and** the same `previous_session_id`.
    pub async fn assert_host_current(&self) -> Result<(), Error> {
        match self.state {
            GenerationState::Ephemeral => Ok(()),
            GenerationState::Superseded => Err(self.texts.superseded(&self.target.session_id)),
            GenerationState::Current => match &self.own {
                Some(own) => own.verify().await,
                None => Err(self.texts.superseded(&self.target.session_id)),
            },
        }
    }

    /// The caller's checks plus [`Self::assert_host_current`].
    pub async fn assert_current(&self) -> Result<(), Error> {
        self.authority.verify().await
    }

    /// The superseded error for this target.
    pub fn superseded_error(&self) -> Error {
        self.texts.superseded(&self.target.session_id)
    }
}

/// The generation authority service: reads the host session store and decides.
#[derive(Debug, Clone)]
pub struct GenerationAuthority {
    pub(super) host: Arc<dyn HostSessionStore>,
    pub(super) texts: GenerationTexts,
}

impl GenerationAuthority {
    /// An authority service over `host` with the default texts.
    pub fn new(host: Arc<dyn HostSessionStore>) -> Self {
        Self {
            host,
            texts: GenerationTexts::default(),
        }
    }

    /// Replaces the error texts.
    #[must_use]
    pub fn with_texts(mut self, texts: GenerationTexts) -> Self {
        self.texts = texts;
        self
    }

    /// The texts in use.
    pub fn texts(&self) -> &GenerationTexts {
        &self.texts
    }

    /// Asserts the caller, reads the host row and captures the tri-state decision:
    ///
    /// - no session key, or no row → [`GenerationState::Ephemeral`] (caller authority only);
    /// - row naming the target → [`GenerationState::Current`], with a lineage entry;
    /// - row naming another generation, or a failed read → [`GenerationState::Superseded`]
    ///   ("failed host reads cannot authorize a durable native binding").
    ///
    /// Only a caller-check failure is returned as an error; a superseded state is a value whose
    /// authority fails.
    #[tracing::instrument(name = "generation.capture", skip_all, fields(session_id = %target.session_id))]
    pub async fn capture(
        &self,
        target: &GenerationTarget,
        caller: &BindingAuthority,
    ) -> Result<GenerationCapture, Error> {
        caller.assert_current()?;
        let Some(key) = &target.session_key else {
            return Ok(self.ephemeral(target, caller));
        };
        let read = self.host.read_session(key).await;
        caller.assert_current()?;
        let capture = match read {
            HostSessionRead::Missing => self.ephemeral(target, caller),
            HostSessionRead::Current(entry) if entry.session_id == target.session_id => {
                let own = BindingAuthority::new(
                    tether_core::always_current(),
                    vec![LineageEntry {
                        store: Arc::clone(&self.host),
                        session_key: key.clone(),
                        session_id: entry.session_id.clone(),
                        previous_session_id: entry.previous_session_id.clone(),
                        texts: self.texts.clone(),
                    }],
                );
                GenerationCapture {
                    target: target.clone(),
                    state: GenerationState::Current,
                    previous_session_id: entry.previous_session_id,
                    previous_change: entry.previous_change,
                    authority: BindingAuthority::combine([caller.clone(), own.clone()]),
                    own: Some(own),
                    texts: self.texts.clone(),
                }
            }
            other => {
                if let HostSessionRead::Failed(error) = &other {
                    tracing::warn!(%error, "host session read failed; generation treated as superseded");
                }
                let superseded = self.texts.superseded(&target.session_id);
                GenerationCapture {
                    target: target.clone(),
                    state: GenerationState::Superseded,
                    previous_session_id: None,
                    previous_change: None,
                    authority: BindingAuthority::combine([
                        caller.clone(),
                        BindingAuthority::superseded(tether_core::always_current(), superseded),
                    ]),
                    own: None,
                    texts: self.texts.clone(),
                }
            }
        };
        Ok(capture)
    }

    fn ephemeral(&self, target: &GenerationTarget, caller: &BindingAuthority) -> GenerationCapture {
        GenerationCapture {
            target: target.clone(),
            state: GenerationState::Ephemeral,
            previous_session_id: None,
            previous_change: None,
            authority: caller.clone(),
            own: None,
            texts: self.texts.clone(),
        }
    }
}
