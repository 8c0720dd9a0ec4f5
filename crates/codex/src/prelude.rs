//! What a host driving Codex uses, in one import: `use tether_codex::prelude::*;` brings the
//! harness and its builder inputs, the traits a host implements for it (`HostTranscript`,
//! `ToolExecutor`, `ApprovalPolicy`, `RunAdmission`) and [`tether_harness_sdk::prelude`] (the store and harness
//! traits whose methods a host calls, the lifecycle, the thread-binding backend).
//!
//! ```
//! use tether_codex::prelude::*;
//!
//! // One app-server per host process, started on the first turn.
//! let server = CodexAppServer::new(CodexConfig::new("/usr/local/bin/codex", "/var/lib/codex"));
//! let settings = ThreadSettings::new("/srv/workspace");
//! // Nothing is approved unless the host's policy says so.
//! let request = ApprovalRequest {
//!     kind: ApprovalKind::Command,
//!     method: "item/commandExecution/requestApproval".into(),
//!     thread_id: None,
//!     params: serde_json::json!({"command": "rm -rf /"}),
//! };
//! assert_eq!(RefuseAll.decide(&request), ApprovalDecision::Refuse);
//! # let _ = (server, settings);
//! ```

pub use tether_harness_sdk::prelude::*;

pub use crate::{
    AdmissionGuard, ApprovalDecision, ApprovalKind, ApprovalPolicy, ApprovalRequest,
    CodexAppServer, CodexConfig, CodexError, CodexHarness, HostTranscript, RefuseAll, RunAdmission,
    ThreadId, ThreadSettings, ToolExecutor, TurnCancel, TurnOutcome, TurnRequest,
};
