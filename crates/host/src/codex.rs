//! The Codex app-server harness on a [`Host`] (feature `codex`): a harness builder wired to the
//! host's store, sessions, clock, lease timing, holder and record of runs in flight, and the
//! host transcript the harness mirrors Codex's items into.

use std::sync::Arc;

use async_trait::async_trait;
use tether_codex::{
    AdmissionGuard, CodexAppServer, CodexHarnessBuilder, HostTranscript, MirrorEntry, RunAdmission,
};
use tether_core::{AppendOutcome, Error, MessageRole, Namespace, SessionKey};
use tether_storage::{NewTranscriptEntry, Store, TranscriptRole};

use crate::{ActiveRuns, Host};

/// The host's record of runs in flight ([`Host::runs`]) as the Codex harness's run admission:
/// each turn and compaction is admitted there (an [`ActiveRuns::start`] guard) while it runs.
#[derive(Debug)]
struct HostRuns(Arc<ActiveRuns>);

impl RunAdmission for HostRuns {
    fn admit(&self, session: &SessionKey) -> AdmissionGuard {
        AdmissionGuard::new(self.0.start(session))
    }
}

/// The host transcript of a Codex harness over the SQL store: each mirrored item is appended
/// under its idempotency key (a repeat resolves to the entry already there), and a context
/// reset reads the keys of the session's active path.
///
/// Roles map as the store knows them: user, assistant, tool result (`tool`); any other role
/// is a `system` entry.
#[derive(Debug, Clone)]
pub struct SqlCodexTranscript {
    store: Store,
}

impl SqlCodexTranscript {
    /// The transcript of `store`'s host sessions.
    pub fn new(store: Store) -> Self {
        Self { store }
    }
}

#[async_trait]
impl HostTranscript for SqlCodexTranscript {
    async fn append(
        &self,
        session: &SessionKey,
        entry: MirrorEntry,
    ) -> Result<AppendOutcome, Error> {
        let role = match entry.role {
            MessageRole::User => TranscriptRole::User,
            MessageRole::Assistant => TranscriptRole::Assistant,
            MessageRole::ToolResult => TranscriptRole::Tool,
            _ => TranscriptRole::System,
        };
        self.store
            .append_transcript(
                session,
                NewTranscriptEntry {
                    role,
                    content: entry.text,
                    idempotency_key: Some(entry.idempotency_key),
                    metadata: None,
                },
            )
            .await
    }

    async fn active_idempotency_keys(&self, session: &SessionKey) -> Result<Vec<String>, Error> {
        Ok(self
            .store
            .active_path(session)
            .await?
            .into_iter()
            .filter_map(|entry| entry.idempotency_key)
            .collect())
    }
}

impl Host {
    /// A Codex harness builder driving `server`, wired to this host: bindings in its store
    /// through the host's one binding store of the Codex namespace (the one
    /// `host.thread_bindings(tether_codex::NAMESPACE)` returns: on its clock and lease timing,
    /// labelled with its holder, blocked keys quarantined durably), generations read from its
    /// sessions, Codex's items mirrored into its transcripts ([`SqlCodexTranscript`]), each
    /// turn and compaction admitted in its record of runs in flight ([`Host::runs`]) for as
    /// long as it runs, so [`HostSessions`](crate::HostSessions)' deletion, reset and context
    /// reset of the session are refused meanwhile ([`Error::CompetingWork`]) without the host
    /// admitting the turn itself (a host that still does admits it twice, which is harmless:
    /// admissions are counted). Add the
    /// host's tools, approvals and thread settings, `build()` it, and register it
    /// (`host.registry().register(Arc::new(harness.clone()))`) so deletions and resets reach
    /// it. Setting the builder's `holder`, `clock`, `lease_config` or `quarantine` again
    /// replaces the shared store by one of the harness's own (a second lease owner of the
    /// namespace).
    ///
    /// ```no_run
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// use std::sync::Arc;
    /// use tether_codex::{CodexAppServer, CodexConfig, ThreadSettings};
    /// use tether_host::Host;
    ///
    /// let host = Host::open("sqlite://tether-data/host.db").await?;
    /// let codex_home = std::path::Path::new("tether-data/codex-home");
    /// let server = Arc::new(CodexAppServer::new(CodexConfig::new("codex", codex_home)));
    /// let harness = host
    ///     .codex_harness(server)
    ///     .settings(ThreadSettings::new("/srv/work"))
    ///     .build()
    ///     .await?;
    /// host.registry().register(Arc::new(harness.clone()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).unwrap();
    /// ```
    pub fn codex_harness(&self, server: Arc<CodexAppServer>) -> CodexHarnessBuilder {
        let store = Arc::new(self.store().clone());
        let builder = tether_codex::CodexHarness::builder(
            server,
            store.clone(),
            store,
            Arc::new(SqlCodexTranscript::new(self.store().clone())),
        )
        .clock(Arc::clone(self.clock()))
        .holder(self.holder())
        .lease_config(*self.lease_config())
        .quarantine(self.quarantine())
        .admission(Arc::new(HostRuns(Arc::clone(self.runs()))));
        // The host's one store of the Codex namespace, so a write through
        // `host.thread_bindings(tether_codex::NAMESPACE)` inside a Codex turn is the turn
        // holder's own (two stores over one namespace are two owners).
        match Namespace::new(tether_codex::NAMESPACE)
            .map_err(Error::from)
            .and_then(|ns| self.shared_thread_bindings(ns))
        {
            Ok(bindings) => builder.bindings(bindings),
            // The builder builds its own from the same settings and reports the same error
            // from `build`.
            Err(error) => {
                tracing::debug!(%error, "the host's codex binding store could not be built");
                builder
            }
        }
    }
}
