//! The crate's one error type.

use std::time::Duration;

/// Everything that can go wrong while driving a `codex app-server`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodexError {
    /// The `codex` binary could not be started.
    #[error("cannot start `{binary}`: {source}")]
    Spawn {
        /// The binary that was tried.
        binary: String,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },
    /// The app-server process ended (crashed, was killed, or closed its output) while it was
    /// still needed. Requests in flight fail with this error; the supervisor starts a new
    /// process for the next operation.
    #[error("the codex app-server exited ({status})")]
    ServerExited {
        /// How it ended, as text (`exit status: 1`, `signal: 9 (SIGKILL)`, or `output closed`).
        status: String,
    },
    /// A request got no response in time: the app-server is treated as hung and is stopped.
    #[error("codex app-server request `{method}` got no response within {timeout:?}")]
    Timeout {
        /// The request method.
        method: String,
        /// The timeout that expired.
        timeout: Duration,
    },
    /// The app-server answered a request with a JSON-RPC error.
    #[error("codex app-server refused `{method}` ({code}): {message}")]
    Rpc {
        /// The request method.
        method: String,
        /// The JSON-RPC error code.
        code: i64,
        /// The error message.
        message: String,
    },
    /// A message did not have the shape this crate expects from the pinned protocol.
    #[error("codex app-server protocol violation: {detail}")]
    Protocol {
        /// What was wrong.
        detail: String,
    },
    /// The native turn ended in failure (`turn/completed` with status `failed`).
    #[error("codex turn failed: {message}")]
    TurnFailed {
        /// The error the app-server reported.
        message: String,
    },
    /// Codex refused to load the bound thread because another app-server process still holds
    /// its writer (another host process that ran it with a shared, still running app-server).
    #[error("codex thread {thread_id} is still open for writing in another app-server process")]
    WriterHeldElsewhere {
        /// The bound thread.
        thread_id: String,
    },
    /// The session's binding could not be written: another generation or owner holds it.
    #[error("the binding of this session was not written: {detail}")]
    BindingRefused {
        /// Why.
        detail: String,
    },
    /// A lease, store or host error from the Tether lifecycle (for example another host
    /// process holds this session's lease).
    #[error(transparent)]
    Lifecycle(#[from] tether_core::Error),
}

impl CodexError {
    pub(crate) fn protocol(detail: impl Into<String>) -> Self {
        Self::Protocol {
            detail: detail.into(),
        }
    }

    /// Whether the error means the app-server process is gone or unusable (the next
    /// operation runs on a fresh process).
    pub fn is_server_lost(&self) -> bool {
        matches!(self, Self::ServerExited { .. } | Self::Timeout { .. })
    }
}

impl From<CodexError> for tether_core::Error {
    fn from(error: CodexError) -> Self {
        match error {
            CodexError::Lifecycle(inner) => inner,
            other => tether_core::Error::other(other.to_string()),
        }
    }
}
