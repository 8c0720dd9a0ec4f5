//! Tool and media result helpers (reference `tool-results.md` parts A–H).
//!
//! Every helper here is pure and total: it takes raw JSON (`serde_json::Value`) by reference,
//! never mutates it, never panics on adversarial input (depth, `__proto__`, odd types, huge
//! strings) and handles nesting of any depth without recursion on the call stack.
//!
//! * [`mirror`] — user-turn mirroring and the transcript recorder's persisted marker (part A).
//! * [`display`] — [`display::infer_tool_meta_from_args`] (part B).
//! * [`delivery`] — message-delivery facts that only the readers can create (part C).
//! * [`redact`] and [`sanitize`] — secret redaction, `sanitize_tool_args` / `sanitize_tool_result`,
//!   and the [`shared::SharedValue`] graph for repeated references (part D).
//! * [`spawn`] — accepted `sessions_spawn` receipts (part E).
//! * [`media`] — host-owned media and `message_tool_only` routing (part F).
//! * [`terminal`] — the terminal-outcome accumulator (part G).

pub mod delivery;
pub mod display;
pub mod media;
pub mod mirror;
pub mod redact;
pub mod sanitize;
pub mod shared;
pub mod spawn;
pub mod terminal;
pub(crate) mod tree;

pub use tree::{deep_clone, drop_deep};
