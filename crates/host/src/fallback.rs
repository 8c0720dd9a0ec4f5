//! The settled-turn finalizer's fallback transcript over the SQL store.

use async_trait::async_trait;
use tether_core::{Error, HostErrorKind, SessionTarget};
use tether_finalizer::{
    FallbackAppend, FallbackAppendError, FallbackAppendResult, FallbackTranscript,
};
use tether_storage::{NewTranscriptEntry, SessionExpectation, Store, TranscriptRole};

/// The host fallback row of [`tether_finalizer`]'s orchestration, written to the SQL store's
/// transcripts: the fallback text as an assistant entry under the run's idempotency key, so a
/// repeated append confirms the first row instead of writing a second.
///
/// The writer fence is checked in the append's own transaction: the session must still be the
/// generation the run resolved and, when the fence names one, at the lifecycle revision it
/// expects; otherwise nothing is written and the orchestration hears
/// [`FallbackAppendResult::SessionRebound`]. A fence naming a writer run id cannot be checked
/// by the SQL store (it records none) and is refused
/// ([`FallbackAppendResult::Blocked`]), never written past.
#[derive(Debug, Clone)]
pub struct SqlFallbackTranscript {
    store: Store,
}

impl SqlFallbackTranscript {
    /// The fallback transcript over `store`'s host sessions.
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

#[async_trait]
impl FallbackTranscript for SqlFallbackTranscript {
    /// A keyed session resolves to its current generation; a session without a key, or one
    /// the store does not know, resolves to itself (the append then reports it missing).
    async fn resolve_target(&self, session: &SessionTarget) -> Result<SessionTarget, Error> {
        let Some(key) = &session.session_key else {
            return Ok(session.clone());
        };
        Ok(match self.store.session(key).await? {
            Some(entry) => SessionTarget {
                agent_id: entry.agent_id,
                session_key: Some(entry.session_key),
                session_id: entry.session_id,
            },
            None => session.clone(),
        })
    }

    async fn append_fallback(
        &self,
        append: FallbackAppend,
    ) -> Result<FallbackAppendResult, FallbackAppendError> {
        if let Err(refused) = (append.assert_still_active)() {
            return Ok(FallbackAppendResult::Blocked {
                reason: refused.to_string(),
            });
        }
        if append.fence.expected_writer_run_id.is_some() {
            return Ok(FallbackAppendResult::Blocked {
                reason: "the SQL store records no writer run id, so a fence naming one cannot be checked"
                    .to_owned(),
            });
        }
        let Some(key) = append.target.session_key.clone() else {
            return Ok(FallbackAppendResult::MissingActiveSession);
        };
        let mut expect =
            SessionExpectation::default().with_session_id(append.target.session_id.clone());
        if let Some(revision) = append.fence.expected_lifecycle_revision {
            expect = expect.with_lifecycle_revision(revision);
        }
        let entry = NewTranscriptEntry {
            role: TranscriptRole::Assistant,
            content: append.message.visible_text(),
            idempotency_key: Some(append.idempotency_key.clone()),
            metadata: None,
        };
        match self
            .store
            .append_transcript_expecting(&key, entry, &expect)
            .await
        {
            Ok(outcome) => Ok(FallbackAppendResult::Appended(outcome)),
            Err(Error::Host {
                kind: HostErrorKind::SessionNotFound { .. },
            }) => Ok(FallbackAppendResult::MissingActiveSession),
            Err(
                changed @ Error::Host {
                    kind: HostErrorKind::SessionChanged { .. },
                },
            ) => Ok(FallbackAppendResult::SessionRebound {
                reason: changed.to_string(),
            }),
            Err(other) => Err(FallbackAppendError::Failed(other)),
        }
    }
}
