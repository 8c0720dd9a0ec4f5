//! Tool and media result helpers (the contracts are in `docs/tool-results.md`).
//!
//! Every helper here is pure and total: it takes raw JSON (`serde_json::Value`) by reference,
//! never mutates it, never panics on adversarial input (depth, `__proto__`, odd types, huge
//! strings) and handles nesting of any depth without recursion on the call stack.
//!
//! * [`mirror`] — user-turn mirroring and the transcript recorder's persisted marker (`docs/tool-results.md, 'Transcript mirroring'`).
//! * [`display`] — [`display::infer_tool_meta_from_args`] (`docs/tool-results.md, 'Display metadata'`).
//! * [`delivery`] — message-delivery facts that only the readers can create (`docs/tool-results.md, 'Message delivery'`).
//! * [`errors`] — the tool-result error rule, failure kinds, error text and code extraction.
//! * [`redact`] and [`sanitize`] — secret redaction, `sanitize_tool_args` / `sanitize_tool_result`,
//!   and the [`shared::SharedValue`] graph for repeated references (`docs/tool-results.md, 'Sanitizing and redaction'`).
//! * [`spawn`] — accepted `sessions_spawn` receipts (`docs/tool-results.md, 'Spawn receipts'`).
//! * [`media`] — host-owned media and `message_tool_only` routing (`docs/tool-results.md, 'Host-owned media'`).
//! * [`terminal`] — the terminal-outcome accumulator (`docs/tool-results.md, 'The terminal-outcome accumulator'`).
//!
//! ```
//! use serde_json::json;
//! use tether_harness_sdk::results::{delivery, display, sanitize};
//!
//! // Display metadata is lossy and redacted; the raw arguments stay untouched.
//! let args = json!({"file_path": "/scratch/a.txt", "offset": 2, "limit": 2});
//! let meta = display::infer_tool_meta_from_args("read", &args, display::DetailMode::Raw);
//! assert_eq!(meta.as_deref(), Some("lines 2-3 from /scratch/a.txt"));
//!
//! // Sanitizing copies; secrets under sensitive keys are masked.
//! let clean = sanitize::sanitize_tool_args(&json!({"password": "hunter2", "count": 3}));
//! assert_eq!(clean, json!({"password": "***", "count": 3}));
//!
//! // Delivery facts only come from the readers.
//! let fact = delivery::project_plugin_message_delivery_fact(&json!({"messageId": "m1"}));
//! assert!(fact.is_some_and(|f| f.is_delivered(false)));
//! ```

pub mod delivery;
pub mod display;
pub mod errors;
mod exec_display;
pub mod media;
pub mod mirror;
pub mod redact;
pub mod sanitize;
pub mod shared;
pub mod spawn;
pub mod terminal;
pub(crate) mod tree;

pub use tree::{deep_clone, drop_deep};
