//! The crate's one error type.

use std::time::Duration;

use tether_core::{Cause, RuntimeErrorKind};

use crate::harness::ToolReport;
use crate::locate::PINNED_CODEX_VERSION;

/// The end of a lost turn's message: how many tools had run, and which may have changed
/// something.
fn ran_note(tools: &[ToolReport]) -> String {
    if tools.is_empty() {
        return String::new();
    }
    let effects = tools.iter().filter(|t| t.side_effect_evidence).count();
    format!(
        " after the turn ran {} tool call(s), {effects} of them with possible side effects",
        tools.len()
    )
}

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
    /// The binary started but never answered the app-server handshake (`initialize`): it exited,
    /// or stayed silent for the whole request timeout, before its first answer. That is a
    /// configuration problem (the program is not `codex`, or not a version that speaks this
    /// app-server protocol), like [`CodexError::Spawn`]: a retry cannot succeed. `source` is
    /// what happened ([`CodexError::ServerExited`] or [`CodexError::Timeout`]). A server that
    /// exits after a successful handshake is [`CodexError::ServerExited`].
    #[error(
        "the binary at {binary} did not answer the codex app-server handshake ({source}); is it `codex`, of the pinned version {PINNED_CODEX_VERSION}?"
    )]
    Handshake {
        /// The binary that was started.
        binary: String,
        /// How the handshake ended: the process exited, or `initialize` timed out.
        #[source]
        source: Box<CodexError>,
    },
    /// The app-server process ended (crashed, was killed, or closed its output) while it was
    /// still needed. Requests in flight fail with this error; the supervisor starts a new
    /// process for the next operation.
    ///
    /// During a turn, `tools_ran` holds the terminal reports of the tools the turn had already
    /// run (see [`CodexError::tools_ran`]).
    #[error("the codex app-server exited ({status}){}", ran_note(tools_ran))]
    #[non_exhaustive]
    ServerExited {
        /// How it ended, as text (`exit status: 1`, `signal: 9 (SIGKILL)`, or `output closed`).
        status: String,
        /// The host tools and native mutations the turn had run when the server was lost, in
        /// order (empty outside a turn, or when none ran).
        tools_ran: Vec<ToolReport>,
    },
    /// A request got no response in time: the app-server is treated as hung and is stopped.
    ///
    /// During a turn, `tools_ran` holds the terminal reports of the tools the turn had already
    /// run (see [`CodexError::tools_ran`]).
    #[error(
        "codex app-server request `{method}` got no response within {timeout:?}{}",
        ran_note(tools_ran)
    )]
    #[non_exhaustive]
    Timeout {
        /// The request method.
        method: String,
        /// The timeout that expired.
        timeout: Duration,
        /// The host tools and native mutations the turn had run when the server was lost, in
        /// order (empty outside a turn, or when none ran).
        tools_ran: Vec<ToolReport>,
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
    /// A compaction's native turn ended in failure (`turn/completed` with status `failed`),
    /// from [`CodexHarness::compact`](crate::CodexHarness::compact). A failed turn of
    /// [`CodexHarness::run_turn`](crate::CodexHarness::run_turn) is not an error: the turn
    /// ran, its items were mirrored, and its outcome says how it ended
    /// (`attempt.terminal` is [`AttemptTerminal::Failed`](tether_core::AttemptTerminal::Failed)).
    #[error("codex turn failed: {message}")]
    TurnFailed {
        /// The error the app-server reported.
        message: String,
    },
    /// Codex refused to load the bound thread because another app-server process still holds
    /// its writer (another host process that ran it with a shared, still running app-server).
    /// Codex lets one live app-server write a thread and releases it only when that process
    /// exits; hosts whose processes share sessions build the harness with
    /// [`process_per_turn(true)`](crate::CodexHarnessBuilder::process_per_turn).
    #[error(
        "codex thread {thread_id} is still open for writing in another app-server process: Codex lets one live app-server write a thread, until that process exits; when several host processes share sessions, build the harness with `process_per_turn(true)` (docs/codex-harness.md, \"Handing a thread between host processes\")"
    )]
    WriterHeldElsewhere {
        /// The bound thread.
        thread_id: String,
    },
    /// The run was cancelled before its Codex turn started: its
    /// [`TurnCancel`](crate::TurnCancel) was cancelled (or its caller dropped
    /// [`CodexHarness::run_turn`](crate::CodexHarness::run_turn)'s future) before `run_turn`
    /// took the session's lease, while it waited for it, or while it resolved the session's
    /// thread. No `turn/start` was sent: nothing reached the model, nothing was mirrored into
    /// the host transcript, the lease (when it was taken) was released and the binding is as it
    /// was (except that a first turn cancelled while its new thread was being started leaves
    /// that thread bound, with no turn on it). Running the turn again is safe. A turn cancelled
    /// after it started is no error: it is interrupted and ends
    /// [`AttemptTerminal::Aborted`](tether_core::AttemptTerminal::Aborted). As a core error
    /// it is [`tether_core::Error::Revoked`] (the caller's own authority refused the turn).
    #[error("the codex turn was cancelled before it started; nothing was sent to the model")]
    CancelledBeforeStart,
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

    /// The app-server exited (`status` as [`CodexError::ServerExited`] describes it), no turn's
    /// tools attached.
    pub(crate) fn server_exited(status: String) -> Self {
        Self::ServerExited {
            status,
            tools_ran: Vec::new(),
        }
    }

    /// A request got no response within `timeout`, no turn's tools attached.
    pub(crate) fn timeout(method: &str, timeout: Duration) -> Self {
        Self::Timeout {
            method: method.to_owned(),
            timeout,
            tools_ran: Vec::new(),
        }
    }

    /// The tools a turn had run when it was lost to the app-server's exit or silence
    /// ([`CodexError::ServerExited`], [`CodexError::Timeout`]), in order; empty for every other
    /// error. The tools' results are in the host transcript already; a caller deciding whether
    /// to run the turn again reads here whether any of them may have changed something
    /// ([`ToolReport::side_effect_evidence`]): a new turn may ask for them again.
    pub fn tools_ran(&self) -> &[ToolReport] {
        match self {
            Self::ServerExited { tools_ran, .. } | Self::Timeout { tools_ran, .. } => tools_ran,
            _ => &[],
        }
    }

    /// This error with the tools of the turn it ended attached, when it is the loss of the
    /// app-server; any other error unchanged.
    pub(crate) fn with_tools_ran(mut self, tools: &[ToolReport]) -> Self {
        if let Self::ServerExited { tools_ran, .. } | Self::Timeout { tools_ran, .. } = &mut self
            && tools_ran.is_empty()
        {
            tools_ran.extend_from_slice(tools);
        }
        self
    }

    /// Whether Codex refused to delete a thread because the history of a fork of it still
    /// references it (the fork must be deleted first).
    pub(crate) fn is_referenced_by_fork(&self) -> bool {
        matches!(self, Self::Rpc { message, .. } if message.contains("forked history still references it"))
    }

    /// Whether Codex answered that it has no rollout of the thread: it keeps no active history
    /// of it (deleted, archived, or never in this app-server's `CODEX_HOME`).
    pub(crate) fn is_no_rollout(&self) -> bool {
        matches!(self, Self::Rpc { message, .. } if message.contains("no rollout found"))
    }

    /// Whether the error means the app-server process is gone or unusable (the next
    /// operation runs on a fresh process).
    pub fn is_server_lost(&self) -> bool {
        matches!(self, Self::ServerExited { .. } | Self::Timeout { .. })
    }

    /// What kind of native-runtime failure this is, for [`tether_core::Error::Runtime`];
    /// `None` for [`CodexError::Lifecycle`], which is a core error already, and for
    /// [`CodexError::CancelledBeforeStart`], the caller's own cancellation (a core
    /// [`Revoked`](tether_core::Error::Revoked)).
    pub fn runtime_kind(&self) -> Option<RuntimeErrorKind> {
        Some(match self {
            Self::WriterHeldElsewhere { .. } => RuntimeErrorKind::Busy,
            Self::ServerExited { .. } | Self::Timeout { .. } => RuntimeErrorKind::Unavailable,
            Self::Spawn { .. } | Self::Handshake { .. } => RuntimeErrorKind::Unusable,
            Self::Rpc { .. } | Self::Protocol { .. } | Self::BindingRefused { .. } => {
                RuntimeErrorKind::Refused
            }
            Self::TurnFailed { .. } => RuntimeErrorKind::TurnFailed,
            Self::Lifecycle(_) | Self::CancelledBeforeStart => return None,
        })
    }

    /// The core error of this one, its text prefixed with `context` (`"codex finalization"`):
    /// see the `From` conversion.
    pub(crate) fn into_core_in(self, context: &str) -> tether_core::Error {
        let text = format!("{context}: {self}");
        self.into_core_with(text)
    }

    /// The `From` conversion with `text` as the runtime error's message.
    fn into_core_with(self, text: String) -> tether_core::Error {
        match (self.runtime_kind(), self) {
            (_, Self::Lifecycle(inner)) => inner,
            (_, Self::CancelledBeforeStart) => tether_core::Error::revoked(text),
            (Some(kind), other) => tether_core::Error::runtime(kind, text, Some(Cause::new(other))),
            // Only `Lifecycle` and `CancelledBeforeStart` have no runtime kind (handled above).
            (None, _) => tether_core::Error::other(text),
        }
    }
}

/// A lifecycle error comes out as it went in, a turn cancelled before it started is
/// [`tether_core::Error::Revoked`]; every other one becomes
/// [`tether_core::Error::Runtime`] of its [`runtime_kind`](CodexError::runtime_kind), with the
/// same text and the `CodexError` itself as its source (reachable by downcasting).
impl From<CodexError> for tether_core::Error {
    fn from(error: CodexError) -> Self {
        let text = error.to_string();
        error.into_core_with(text)
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use tether_core::Error;

    use super::*;

    #[test]
    fn every_kind_survives_the_conversion_to_a_core_error() {
        let cases = [
            (
                CodexError::WriterHeldElsewhere {
                    thread_id: "t".into(),
                },
                RuntimeErrorKind::Busy,
            ),
            (
                CodexError::server_exited("signal: 9 (SIGKILL)".into()),
                RuntimeErrorKind::Unavailable,
            ),
            (
                CodexError::timeout("turn/start", Duration::from_secs(1)),
                RuntimeErrorKind::Unavailable,
            ),
            (
                CodexError::Spawn {
                    binary: "codex".into(),
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "not found"),
                },
                RuntimeErrorKind::Unusable,
            ),
            (
                CodexError::Handshake {
                    binary: "/bin/true".into(),
                    source: Box::new(CodexError::server_exited("exit status: 0".into())),
                },
                RuntimeErrorKind::Unusable,
            ),
            (
                CodexError::Handshake {
                    binary: "/usr/bin/sleepy".into(),
                    source: Box::new(CodexError::timeout("initialize", Duration::from_secs(1))),
                },
                RuntimeErrorKind::Unusable,
            ),
            (
                CodexError::Rpc {
                    method: "thread/start".into(),
                    code: -32600,
                    message: "bad".into(),
                },
                RuntimeErrorKind::Refused,
            ),
            (CodexError::protocol("odd"), RuntimeErrorKind::Refused),
            (
                CodexError::BindingRefused {
                    detail: "none bound".into(),
                },
                RuntimeErrorKind::Refused,
            ),
            (
                CodexError::TurnFailed {
                    message: "model error".into(),
                },
                RuntimeErrorKind::TurnFailed,
            ),
        ];
        for (codex, kind) in cases {
            let text = codex.to_string();
            let core = Error::from(codex);
            match &core {
                Error::Runtime {
                    kind: k, message, ..
                } => {
                    assert_eq!(*k, kind);
                    assert_eq!(message, &text);
                }
                other => panic!("{text}: became {other:?}"),
            }
            let source = core.source().expect("the codex error is kept");
            let cause = source.downcast_ref::<Cause>().expect("kept as a Cause");
            assert!(
                cause.downcast_ref::<CodexError>().is_some(),
                "{text}: the cause is not the CodexError"
            );
            assert_eq!(core.is_busy(), kind == RuntimeErrorKind::Busy, "{text}");
            assert_eq!(
                core.is_retryable(),
                matches!(kind, RuntimeErrorKind::Busy | RuntimeErrorKind::Unavailable),
                "{text}"
            );
        }
        // The spawn error keeps its io::Error further down the chain.
        let spawn = Error::from(CodexError::Spawn {
            binary: "codex".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "not found"),
        });
        let mut chain = spawn.source();
        let mut io = None;
        while let Some(e) = chain {
            if let Some(found) = e.downcast_ref::<std::io::Error>() {
                io = Some(found.kind());
            }
            chain = e.source();
        }
        assert_eq!(io, Some(std::io::ErrorKind::NotFound));
    }

    #[test]
    fn a_writer_held_elsewhere_says_what_to_do() {
        let held = CodexError::WriterHeldElsewhere {
            thread_id: "t-1".into(),
        }
        .to_string();
        assert!(held.contains("t-1"), "{held}");
        assert!(held.contains("another app-server process"), "{held}");
        assert!(held.contains("process_per_turn(true)"), "{held}");
    }

    #[test]
    fn a_lifecycle_error_comes_out_unchanged_and_context_prefixes_the_text() {
        let inner = Error::revoked("closed");
        let out = Error::from(CodexError::Lifecycle(inner));
        assert!(matches!(out, Error::Revoked { .. }));
        let cancelled = Error::from(CodexError::CancelledBeforeStart);
        assert!(matches!(cancelled, Error::Revoked { .. }), "{cancelled:?}");
        let timed = CodexError::timeout("turn/start", Duration::from_secs(2))
            .into_core_in("codex finalization");
        assert!(timed.is_retryable());
        assert!(
            timed
                .to_string()
                .starts_with("codex finalization: codex app-server request `turn/start`"),
            "{timed}"
        );
    }
}
