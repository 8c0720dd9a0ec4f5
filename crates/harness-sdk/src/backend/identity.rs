//! Binding identities: which row a session's binding lives in, and which generation acts.

use tether_core::{AgentId, BindingId, BindingKey, BindingKeyKind, SessionId, SessionKey};

use crate::generation::GenerationTarget;

/// Who acts on a binding row: the row's key plus the generation (physical session id) acting.
///
/// - [`BindingIdentity::session`]: a session binding, keyed by the stable key when the session
///   has a session key (one row across physical rotations), by the physical key otherwise;
/// - [`BindingIdentity::conversation`]: a conversation binding (`conversation:<id>`), owned by
///   no generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingIdentity {
    key: BindingKey,
    agent_id: Option<AgentId>,
    session_id: Option<SessionId>,
    session_key: Option<SessionKey>,
}

impl BindingIdentity {
    /// The identity of generation `session_id` of a session.
    pub fn session(
        agent_id: AgentId,
        session_id: SessionId,
        session_key: Option<SessionKey>,
    ) -> Self {
        Self {
            key: BindingKey::for_session(&agent_id, &session_id, session_key.as_ref()),
            agent_id: Some(agent_id),
            session_id: Some(session_id),
            session_key,
        }
    }

    /// The identity of a conversation binding.
    pub fn conversation(binding_id: &BindingId) -> Self {
        Self {
            key: BindingKey::conversation(binding_id),
            agent_id: None,
            session_id: None,
            session_key: None,
        }
    }

    /// The row key.
    pub fn key(&self) -> &BindingKey {
        &self.key
    }

    /// The agent, for session identities.
    pub fn agent_id(&self) -> Option<&AgentId> {
        self.agent_id.as_ref()
    }

    /// The acting generation, for session identities.
    pub fn session_id(&self) -> Option<&SessionId> {
        self.session_id.as_ref()
    }

    /// The logical session key, when known.
    pub fn session_key(&self) -> Option<&SessionKey> {
        self.session_key.as_ref()
    }

    /// Whether this is a session identity with a stable key (the only identities that can
    /// reclaim a row across generations).
    pub fn is_stable(&self) -> bool {
        self.key.kind() == BindingKeyKind::Stable && self.session_id.is_some()
    }

    /// Whether the row key is a legacy-import conversation key (`conversation:legacy-*`), whose
    /// cleared rows keep their provenance.
    pub fn is_legacy_conversation(&self) -> bool {
        self.key.as_str().starts_with("conversation:legacy-")
    }

    /// The identity of another generation of the same session (same stable key; the physical
    /// key of `session_id` for a session without a key). A conversation identity is returned
    /// unchanged.
    #[must_use]
    pub fn with_session_id(&self, session_id: SessionId) -> Self {
        match &self.agent_id {
            Some(agent) => Self::session(agent.clone(), session_id, self.session_key.clone()),
            None => self.clone(),
        }
    }

    /// The generation-authority target of a session identity.
    pub fn generation_target(&self) -> Option<GenerationTarget> {
        Some(GenerationTarget::new(
            self.agent_id.clone()?,
            self.session_id.clone()?,
            self.session_key.clone(),
        ))
    }

    /// Whether a row owned by `owner` belongs to this identity's generation. A row without an
    /// owner (legacy conversation import) belongs to every identity; an owned row belongs only
    /// to the same generation.
    pub fn owns(&self, owner: Option<&SessionId>) -> bool {
        match owner {
            None => true,
            Some(owner) => self.session_id.as_ref() == Some(owner),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_session_shape() {
        let agent = AgentId::new("Main").unwrap();
        let s1 = SessionId::new("s1").unwrap();
        let key = SessionKey::new("agent:main:peer@example.com").unwrap();
        let stable = BindingIdentity::session(agent.clone(), s1.clone(), Some(key));
        assert!(stable.is_stable());
        assert!(!stable.key().as_str().contains("example.com"));
        let s2 = stable.with_session_id(SessionId::new("s2").unwrap());
        assert_eq!(s2.key(), stable.key(), "one row across physical rotations");
        assert!(stable.owns(Some(&s1)) && !s2.owns(Some(&s1)) && s2.owns(None));

        let physical = BindingIdentity::session(agent, s1, None);
        assert_eq!(physical.key().as_str(), "session:main:s1");
        assert!(!physical.is_stable());
        let rotated = physical.with_session_id(SessionId::new("s2").unwrap());
        assert_eq!(rotated.key().as_str(), "session:main:s2");

        let legacy = BindingIdentity::conversation(&BindingId::new("legacy-7").unwrap());
        assert!(legacy.is_legacy_conversation() && !legacy.is_stable());
        assert!(legacy.generation_target().is_none());
    }
}
